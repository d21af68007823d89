"""pytest under MPI: the plugin, deadline-guarded agreement, outcomes, the watchdog, the pulse, topology, the pair schedule."""
