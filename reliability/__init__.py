"""The reliability report (`make reliability`): faults injected, what the user saw, and leak counts."""
