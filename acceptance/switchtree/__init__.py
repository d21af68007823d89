"""A cluster's switch tree: the model (fabric: a tree per rail of leaves, uplinks and spines; cabling:
a rail's cables and LIDs; routes: the cables each pair crosses) and its readers (topofiles: Slurm's
topology.conf and topology.yaml, ibnetdiscover output; lftfiles: the forwarding tables; sources:
what they share)."""
