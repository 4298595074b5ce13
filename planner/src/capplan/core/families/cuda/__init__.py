"""The CUDA family: capabilities, releases, "runs on", the planner's rules and its picker."""
