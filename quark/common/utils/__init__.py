"""AMD Quark's ``quark.common.utils``: what Quark's examples import from it (``export_for_training``,
``ScreenLogger``)."""
