"""Optional speed-ups of the engine's step, each checked against TRL's own results. A reader can skip this folder:
``rloo_demo.engine.trainers`` composes them in where they apply."""
