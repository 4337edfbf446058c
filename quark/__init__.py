"""AMD Quark's quantization config API, executed on Brevitas."""
