"""PyTorch twins of the workload zoo, measured on the same terms as the XLA variants.

`twins` (the torch modules), `convert` (Flax state <-> torch, layouts), `program` (a twin made
callable, eager or `torch.compile`d), `measure` (one experiment cell). The runner imports
`xlafuse.torch.measure` only for a torch variant's cell, so xlafuse imports without torch; a torch
variant fails config validation with one line saying how to install it (`pip install -e ".[torch]"`).
"""
