"""Plans: each op on a set of devices, whole or split, and how a plan is priced.

A placement puts each op whole on one device; a plan also says how an op's work is divided over
its devices, in torch DTensor's vocabulary (`Shard(d)`, `Replicate()`, `Partial()`, `layout.py`).
The splits an op's maths allows are `rules.py`'s; `plan.py` is the plain data and its JSON file
(`placer.plan/1`), of which every placement is the special case; `check.py` checks a plan against
its graph. A plan is priced by lowering it (`lower.py`) to an ordinary `OpGraph` and `Placement`:
each split op one op per shard, each layout change a collective (`convert.py`, rings in
`collectives.py`), which `pricing.py` hands to the simulator with the cluster's costs.
`data_parallel.py` is the plan users run most: DDP's. Only inference steps are priced so far.
"""
