"""The services the controller calls: the one training slot and its job, cached reads of runs, sampling from runs'
policies, managing runs, the speed estimate. The public Space's policy they apply is in ``rloo_demo.public``."""
