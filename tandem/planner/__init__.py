"""The planner: moves workers between the prefill and decode pools to meet latency targets.

policy.py is the rule, a pure function of one round's measurements and the workers' loads;
driver.py runs the rounds (measure, plan, hand the switch to an executor, record it) for both of
its users, the gateway (tandem/gateway/planner_loop.py) and the fleet simulator (tandem/sim/planner.py).
"""
