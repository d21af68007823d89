"""How each suite measures: the pairwise template (p2p) and its metrics, collectives, memory registration, incast, intranode paths, GPUDirect paths."""
