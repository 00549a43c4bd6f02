"""How the rendered objects reach a cluster through a framework: the Pulumi component and the TorchX component."""
