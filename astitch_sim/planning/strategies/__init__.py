"""The strategies (registry.py lists them); each turns a Graph into a Plan (see compiler.compile)."""
