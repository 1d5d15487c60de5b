"""Models by name: resolved offline first, loaded, sized against this machine, sampled from."""
