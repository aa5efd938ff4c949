#!/usr/bin/env bash
# Open MPI's remote agent for namespace hosts (measure_hier.sh): mpirun calls it as ssh,
# `mpi_netns_agent.sh HOST COMMAND...`, and it runs COMMAND inside the network namespace of HOST
# (an address that MH_NETNS_OF, set by the caller, maps: "10.213.0.1=nsA 10.213.0.2=nsB ..."),
# under a host name of its own (the namespace's name).
set -u
host=$1
shift
for pair in ${MH_NETNS_OF:-}; do
  if [ "${pair%%=*}" = "$host" ]; then
    # A host name of its own too (a UTS namespace), as mpirun's host has: Open MPI tells nodes
    # apart by name.
    exec ip netns exec "${pair#*=}" unshare --uts /bin/sh -c "hostname '${pair#*=}' && $*"
  fi
done
echo "mpi_netns_agent.sh: no namespace for host '$host' (MH_NETNS_OF='${MH_NETNS_OF:-}')" >&2
exit 1
