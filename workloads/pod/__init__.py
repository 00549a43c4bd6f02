"""The programs that run inside the pods, shipped in the scripts ConfigMap: standard library only."""
