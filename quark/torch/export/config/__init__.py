"""AMD Quark's export configs (``quark.torch.export.config.config``)."""
