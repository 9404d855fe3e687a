class TetherError(Exception):
    """Base of every tether error."""
