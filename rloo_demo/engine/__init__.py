"""The training engine: TRL's RLOOTrainer plus what this product records and measures, run as a job."""
