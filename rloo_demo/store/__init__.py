"""What a run leaves on disk: the crash-safe run folder, its JSON lines, the runs folder as a whole."""
