"""Plans: each op on a set of devices, whole or split, and how a plan is priced.

A placement puts each op whole on one device; a plan also says how an op's work is divided over
its devices, in torch DTensor's vocabulary (`Shard(d)`, `Replicate()`, `Partial()`, `layout.py`).
The splits an op's maths allows are `rules.py`'s; `plan.py` is the plain data and its JSON file
(`placer.plan/1`), of which every placement is the special case; `check.py` checks a plan against
its graph. A plan is priced by lowering it (`lower.py`) to an ordinary `OpGraph` and `Placement`:
each split op one op per shard, each layout change a collective (`convert.py`, rings in
`collectives.py`), which `pricing.py` hands to the simulator with the cluster's costs.
`data_parallel.py` is the plan users run most: DDP's; `fsdp.py` is FSDP's (ZeRO-3); on inference
steps so far `tensor_parallel.py` is Megatron's, `pipeline_data.py` pipeline stages each data
parallel (more stages of fewer replicas where two do not fit), `data_parallel_by_speed.py` DDP with the batch cut by each device's speed (balanced on each device's busy seconds, `busy.py`). A training
step of a plan (`training.py`) is the training program placer builds for any placed graph, run on
the lowered graph with each replicated weight one copy per device (`replicas.py`), plus the
gradients' collectives: DDP's bucketed all-reduce beside the backward pass (`grad_sync.py`),
FSDP's gather again and reduce-scatter (`fsdp_backward.py`), spliced in as steps
(`program_steps.py`). Plans are searched, on inference or training steps, by local search (`search.py`),
by FlexFlow's MCMC (`mcmc.py`) and, from the policy layer, by REINFORCE (`placer.policy.plan_reinforce`), all
moving units of ops in `space.py`, each plan priced once (`scoring.py`).
"""
