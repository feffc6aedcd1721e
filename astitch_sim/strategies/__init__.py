"""The four strategies; each turns a Graph into a Plan (see compiler.compile)."""
