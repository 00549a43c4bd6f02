"""The command-line front ends of the workloads."""
