// Partitioning entry point (filled in by the partitioning work).
