"""HLO targets (a file, a dump folder, a workload) resolved, inspected, diffed and explained."""
