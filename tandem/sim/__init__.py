"""The fleet simulator (`tandem sim`): a discrete-event simulation of the gateway, its worker pools,
the KV tiers and the planner, driving the real routing, placement, prefill-order and planner code
(tandem/router, tandem/planner, tandem/engine/prefill_order.py) with cost models per accelerator
and per model.

Files, one concept each: events.py (clock and event queue), hardware.py (accelerator presets),
model_spec.py (model descriptions), cost_model.py (step time from FLOPs and bytes),
prefix_cache.py (a worker's device block cache), kv_tiers.py (host tier and shared store),
request.py (one simulated request), worker.py (continuous batching), registry.py (the worker
table the real Router reads), gateway.py (routing, placement, handoff), planner.py (role
switches), trace.py (Mooncake traces), metrics.py (summary), config.py (settings), fleet.py (build
and run), calibrate.py (CPU constants from measurements, predicted against measured), cli.py.
"""
