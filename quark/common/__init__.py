"""AMD Quark's framework-neutral package, as far as Quark's PyTorch scripts import it: the bases of the
config enums and data types (:mod:`.data_type`) and ``utils`` (:mod:`.utils.import_utils`,
:mod:`.utils.log`)."""
