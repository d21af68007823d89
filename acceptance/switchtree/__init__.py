"""A cluster's switch tree: the model (fabric: a tree per rail of leaves, uplinks and spines) and its
readers (topofiles: Slurm's topology.conf and topology.yaml, ibnetdiscover output)."""
