"""Stand-ins for engines that cannot run here (they need GPUs), each following its source."""
