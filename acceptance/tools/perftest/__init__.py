"""perftest's ib_write_bw / ib_write_lat as a cross-check of the harness's own numbers.

The same pairs and rails the harness measures, measured again by the tools people
know (docs/methodology.md §2): each pair runs a perftest server on one node and a client on
the other, the client's report is parsed, and the numbers are recorded beside the
harness's own (suite "perftest", engine "perftest", verdict "info").

perftest writes its report twice: as text on stdout and, with `--out_json
--out_json_file=F`, as a file (src/perftest_parameters.c print_full_bw_report /
print_report_lat -> write_test_info_to_file + write_bw_report_to_file /
write_report_lat_to_file). The file comes in two dialects:

  perftest <= 6.19 (e.g. Debian's perftest 4.5+0.17, `--version` 6.06): bare keys, bare
      values, a trailing comma after every entry and brace. Not JSON: json.loads fails.
  perftest >= 6.20 (commit f9e82f7, release 24.01.0-0.38): standard JSON.

Both carry the same keys: {"test_info": {...}, "results": {"MsgSize", "n_iterations",
"BW_peak", "BW_average", "MsgRate"}} for BW tests, and {"MsgSize", "n_iterations", "t_min",
"t_max", "t_typical", "t_avg", "t_stdev", "percentile_99", "percentile_99.9"} for latency
tests. parse_bw / parse_lat accept either dialect and the text report.

Units: the JSON has none. BW values are Gbit/s (1e9 bit/s) because every command here
passes --report_gbits; the text report names its unit in the header ([Gb/sec], or
[MB/sec] / [MiB/sec] = 2^20 B/s, converted). Latencies are microseconds, half a
round trip for write (perftest sorts iters-1 RTT/2 samples, drops the 2 largest and
takes percentile index ceil(p * m) of the m = iters-3 left; t_stdev truncates each
deviation to whole microseconds).

One module per concern: command (the tools, their command lines, Spec), parse (the reports),
gid (the RoCE GID and address from sysfs), process (servers and clients, locally or over an MPI
pair) and records. Nothing here imports pytest; the MPI part (process.run_pair) only uses the
communicator it is given.
"""

from .command import DEFAULT_TCP_PORT, ENV_DIR, TOOLS, Spec, bw_command, find_tools, lat_command, supports_json, where_searched
from .gid import ipv4_of_gid, netdev_ipv4, rail_address, roce_gid_index
from .parse import CLOCK_PROBLEM, BwResult, LatResult, PerftestError, PerftestParseError, parse_bw, parse_lat
from .process import PairOutcome, ToolRun, choose_port, port_free, port_listening, run_local_pair, run_pair
from .records import ENGINE, SUITE, record_results, records_for

__all__ = ["CLOCK_PROBLEM", "DEFAULT_TCP_PORT", "ENGINE", "ENV_DIR", "SUITE", "TOOLS", "BwResult", "LatResult",
           "PairOutcome", "PerftestError", "PerftestParseError", "Spec", "ToolRun", "bw_command", "choose_port",
           "find_tools", "ipv4_of_gid", "lat_command", "netdev_ipv4", "parse_bw", "parse_lat", "port_free",
           "port_listening", "rail_address", "record_results", "records_for", "roce_gid_index", "run_local_pair", "run_pair",
           "supports_json", "where_searched"]
