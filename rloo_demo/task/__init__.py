"""What a run learns from: its prompts (data), and the rewards that score its completions."""
