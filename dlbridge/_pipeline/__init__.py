"""The conversion pipeline: decide, then run (export, move, dense copy, import)."""
