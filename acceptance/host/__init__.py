"""Facts about this node: sysfs, nodefacts, NICs and rails, port counters, PCIe, NUMA, Xids, Slurm's view of it,
and the switch ports' counters read through the fabric."""
