"""The planner: moves workers between the prefill and decode pools to meet latency targets.

policy.py is the rule, a pure function of one round's measurements and the workers' loads.
"""
