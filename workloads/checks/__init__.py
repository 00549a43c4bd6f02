"""Every cross-field and cross-object check of a stack and of a run file."""
