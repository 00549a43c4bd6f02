"""The derivation: one ``WorkloadModel`` built from a checked stack, and everything it is made of."""
