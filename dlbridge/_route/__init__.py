"""The fast route: replays a decision the pipeline made."""
