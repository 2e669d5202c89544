"""Jobs: what the commands do, as library calls with typed settings in and a typed result out.

`placer.jobs.settings` holds the settings every job shares (the model, the placement, the hardware,
what a step is); each job module adds its own frozen settings dataclass and result. The CLI
(`placer.commands`) only parses arguments into settings, calls a job and prints its result;
benchmarks and notebooks call the jobs directly.
"""
