"""What a port counter means for a verdict, by name: its kind (how it is judged) and the class of that
kind (what a rise means: a fault, congestion, an application's own error, traffic). Used by the counters
(acceptance.host.counters), the node check and the one judge (acceptance.rules.judge), which holds each
kind to its bound.

Every counter the sources below list is classed from their own description of it; docs/rdma.md §5 lists
each class with its source. A name none of them lists is "other" (information): a counter this harness
does not know never fails a port.

Sources:
  PMA     the IB spec's PortCounters / PortCountersExtended in sysfs counters/, described in the
          kernel's Documentation/ABI/stable/sysfs-class-infiniband
  mlx5    drivers/infiniband/hw/mlx5/counters.c (sysfs hw_counters/) and the commits that added them:
          0ad17a8f7fa0 (port protocol stats), 58dcb60a226e (extended error counters), d7fab916374c
          (RoCE accelerator counters), 4d7dff2b8b24 (RoCE ICRC counter), b339e0a39dc3 (retries exceeded)
  ethtool Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst (`ethtool -S`,
          each counter typed Informative, Acceleration or Error)
  rxe     drivers/infiniband/sw/rxe/rxe_hw_counters.c (Soft-RoCE hw_counters/)
"""

from __future__ import annotations

import re

KINDS = ("error", "retransmit", "pre_fec", "discard", "pause", "pause_duration", "cnp", "wait", "app", "data",
         "other")
# What a rise of each kind means. fault: the link, the NIC or the fabric lost or damaged traffic (fails);
# congestion: the fabric held traffic back or dropped it for want of buffers (warns past a bound);
# application: a program's own error, such as a receive buffer too small (information: never the node's);
# traffic: volume (information); other: a name no source lists, or a count off the RDMA path (information).
CLASS_OF = {"error": "fault", "retransmit": "fault", "pre_fec": "fault", "discard": "congestion",
            "pause": "congestion", "pause_duration": "congestion", "cnp": "congestion", "wait": "congestion",
            "app": "application", "data": "traffic", "other": "other"}

# hw_counters named req_*_error(s) / resp_*_error(s): mlx5's 32-bit Q-counters (their width, not their class)
REQ_RESP_ERROR = re.compile(r"^(?:req|resp)_\w+_errors?$")

# ---- fault: must not rise ---------------------------------------------------------------------------
_ERRORS = frozenset((
    # PMA ("Errors info"): minor link errors, packets received with an error or marked bad upstream,
    # not forwarded by a switch relay, failing partition checks, link recoveries and downs, buffer overruns
    "symbol_error", "port_rcv_errors", "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "link_error_recovery", "link_downed", "port_xmit_constraint_errors", "port_rcv_constraint_errors",
    "local_link_integrity_errors", "excessive_buffer_overrun_errors",
    # mlx5: "transport retries exceed error" (the queue pair failed: the fabric kept losing its packets),
    # and RoCE packets that failed their ICRC check (corrupted on the way)
    "req_transport_retries_exceeded", "rx_icrc_encapsulated",
    # rxe: retries exhausted, a packet the network stack did not send
    "retry_exceeded_err", "send_err",
    # ethtool, physical port, type Error: frames lost to bad symbols, CRC or length (rx_symbol_err_phy and
    # rx_pcs_symbol_err_phy: symbol errors FEC did not correct), a peer with a larger MTU, a flapping link,
    # a failing module, pauses switched off after a pause storm (drops may follow)
    "rx_crc_errors_phy", "rx_symbol_err_phy", "rx_pcs_symbol_err_phy", "rx_in_range_len_errors_phy",
    "rx_out_of_range_len_phy", "rx_oversize_pkts_phy", "rx_undersize_pkts_phy", "rx_fragments_phy",
    "rx_jabbers_phy", "rx_unsupported_op_phy", "tx_errors_phy", "link_down_events_phy",
    "module_bus_stuck", "module_high_temp", "module_bad_shorted", "tx_pause_storm_error_events",
    # ethtool, device, type Error: PCIe signal integrity
    "rx_pci_signal_integrity", "tx_pci_signal_integrity",
    # ethtool, software port, type Error: the NIC completed work with an error (tx_cqe_err, rx_wqe_err) and
    # the driver had to recover a queue (tx_recover, rx_recover, ch_eq_rearm); packets over the MTU
    "tx_cqe_err", "rx_wqe_err", "tx_recover", "rx_recover", "ch_eq_rearm",
    "rx_oversize_pkts_sw_drop", "rx_oversize_pkts_buffer",
))
# Retransmissions: a lost, late or out-of-order packet or ACK, recovered by the transport. Judged
# against the port's traffic in the same window (counters.retransmit_ppm_max), not as a bare count.
_RETRANSMITS = frozenset((
    # mlx5: "errors in the packet transport sequence number" (out_of_sequence), duplicate requests, NAKs
    # for a sequence error, ACK timeouts; adaptive retransmissions and their timeouts (RoCE accelerator)
    "out_of_sequence", "duplicate_request", "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err",
    "roce_adp_retrans", "roce_adp_retrans_to",
    # rxe (duplicate_request above too)
    "completer_retry_err", "rcvd_seq_err", "out_of_seq_request",
))
# Errors before FEC corrects them (ethtool: rx_err_lane_<l>_phy "physical raw errors per lane ... before
# FEC corrections", rx_corrected_bits_phy "corrected bits ... according to active FEC"). PAM4 links (50G
# a lane and up: 200, 400, 800G ports) always have them (IEEE 802.3 holds such a link to a pre-FEC BER of
# 2.4e-4 or better, and RS(544,514) FEC to a BER of 1e-12 after it: Dell KB 000286734 on ConnectX-6 Dx):
# judged as a bit error rate against the bits the lane (or port) received, never as a count.
RX_ERR_LANE = re.compile(r"^rx_err_lane_\d+_phy$")
CORRECTED_BITS = "rx_corrected_bits_phy"
BITS_COUNTER = "rx_bits_phy"

# ---- application: information only ------------------------------------------------------------------
_APP = frozenset((
    # mlx5 extended error counters: the work an application posted went wrong by its own doing: "local
    # length errors" (a receive buffer too small), "remote invalid request" and "remote access" errors (an
    # operation or rkey the peer rejects); the CQE error totals count every such completion and the flushes
    # of a queue pair the application tore down with work still posted
    "resp_local_length_error", "req_remote_invalid_request", "req_remote_access_errors",
    "resp_remote_access_errors", "resp_cqe_error", "req_cqe_error", "resp_cqe_flush_error", "req_cqe_flush_error",
    # Receiver Not Ready: the peer application had no receive posted (mlx5 rnr_nak_retry_err, and
    # req_rnr_retries_exceeded "RNR NAKs retries exceed error"; rxe's RNR NAKs received and sent, and
    # its RNR retries exhausted)
    "rnr_nak_retry_err", "req_rnr_retries_exceeded", "rcvd_rnr_err", "send_rnr_err", "retry_rnr_exceeded_err",
))

# ---- congestion ---------------------------------------------------------------------------------------
# Packets dropped for want of buffers: warn past counters.discards_max.
_DISCARDS = frozenset((
    # PMA: "discarded by the port because the port is down or congested"; VL15 (subnet management)
    # packets "dropped due to resource limitations"
    "port_xmit_discards", "VL15_dropped",
    # mlx5: "drops ... due to lack of WQE" (receives posted too slowly for the traffic)
    "out_of_buffer",
    # ethtool: no buffers on the port (rx_discards_phy "the adapter is congested"), transmit discards
    # (head of line, pause), no receive buffers in the host (rx_out_of_buffer), in the device (dev_*), or
    # a PCIe bus slower than the traffic (outbound_pci_buffer_overflow)
    "rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer", "dev_out_of_buffer", "dev_internal_queue_oob",
    "outbound_pci_buffer_overflow",
))
_PRIO_DISCARD = re.compile(r"^rx_prio\d+_(?:discards|buf_discard|cong_discard)$")  # ethtool, per priority
# Pause frames (ethtool: "the network is congested" / "the NIC is congested"): warn past pause_rate_max.
_PAUSE = frozenset(("rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_global_pause", "tx_global_pause",
                    "rx_global_pause_transition"))
_PRIO_PAUSE = re.compile(r"^(?:rx|tx)_prio\d+_pause(?:_transition)?$")
# Congestion notifications and ECN marks: warn past cnp_rate_max. mlx5 congestion counters, the CNPs of
# RoCE slow restart, mlx5's optional CNP/CE counters; ethtool's ECN-marked packets (rx_ecn_mark,
# rx_prio<p>_marked "ecn marked ... due to per host congestion").
CNP_COUNTERS = frozenset(("np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "np_ecn_marked_roce_packets"))
_CNP = CNP_COUNTERS | {"roce_slow_restart_cnps", "cc_rx_ce_pkts", "cc_rx_cnp_pkts", "cc_tx_cnp_pkts", "rx_ecn_mark"}
_PRIO_MARKED = re.compile(r"^rx_prio\d+_marked$")
# Back-pressure recorded without a bound: PMA port_xmit_wait ("data to transmit but no data was sent"),
# ethtool's receive buffer over 85% full, long pause storms the NIC only warned about, PCIe stalls
# (seconds above 30%), and RoCE slow restarts (the sender's rate cut back).
_WAIT = frozenset(("port_xmit_wait", "rx_buffer_passed_thres_phy", "tx_pause_storm_warning_events",
                   "outbound_pci_stalled_rd_events", "outbound_pci_stalled_wr_events", "roce_slow_restart",
                   "roce_slow_restart_trans"))

# ---- traffic ------------------------------------------------------------------------------------------
# The packets a port sent and received, per driver (the first pair a port has is its traffic).
PACKET_COUNTERS = (("sent_pkts", "rcvd_pkts"), ("port_xmit_packets", "port_rcv_packets"),
                   ("unicast_xmit_packets", "unicast_rcv_packets"))
_DATA = frozenset((
    # PMA "Data info" (packets and bytes are matched by _BYTES_PACKETS too)
    "port_xmit_data", "port_rcv_data",
    # mlx5: requests received, DC connections
    "rx_write_requests", "rx_read_requests", "rx_atomic_requests", "rx_dct_connect",
    # rxe
    "sent_pkts", "rcvd_pkts", "rdma_sends", "rdma_recvs",
    # ethtool, physical port, Informative: what the port could have received (rx_bits_phy), frame kinds
    "rx_bits_phy", "rx_multicast_phy", "tx_multicast_phy", "rx_broadcast_phy", "tx_broadcast_phy",
    "rx_mac_control_phy", "tx_mac_control_phy",
    # ethtool: packets that matched no flow of this host (a switch flooding unknown unicast: nothing this
    # port lost), and packets that arrived while the interface was down (a down port fails the ports check)
    "rx_steer_missed_packets", "rx_if_down_packets",
))
_BYTES_PACKETS = re.compile(r"_(?:bytes|packets)(?:_phy)?$")
# Everything else is "other": among the sources' counters, rxe's ack_deferred (its completer's scheduling),
# module_unplug and the PCIe stall percentages (gauges, not counts), and the Ethernet driver's software
# counters (checksum, TSO, LRO/GRO, XDP, XSK, TLS, PTP, aRFS, page pool, ...): the kernel's own Ethernet
# path, which RDMA traffic bypasses.


def kind_of(name: str) -> str:
    """What a counter means for a verdict: one of KINDS (its class: CLASS_OF).

    error           a fault: must not rise (symbol_error, link_downed, rx_crc_errors_phy, rx_icrc_encapsulated,
                    req_transport_retries_exceeded, retry_exceeded_err, ...)
    retransmit      a fault recovered by the transport, judged per million packets of the port
                    (out_of_sequence, packet_seq_err, local_ack_timeout_err, roce_adp_retrans, and rxe's
                    completer_retry_err, duplicate_request, ...)
    pre_fec         bit errors before FEC (rx_err_lane_<l>_phy, rx_corrected_bits_phy): judged as a pre-FEC
                    bit error rate against the bits the lane or port received
    discard         congestion: dropped packets (port_xmit_discards, rx_discards_phy, rx_prioN_discards, out_of_buffer)
    pause           congestion: PFC / global pause frames (rx_prio3_pause, tx_pause_ctrl_phy, rx_prioN_pause_transition)
    pause_duration  congestion: time spent paused, microseconds (*_pause_duration)
    cnp             congestion notifications and ECN marks (np_cnp_sent, rp_cnp_handled, np_ecn_marked_..., rx_ecn_mark)
    wait            congestion recorded without a bound (port_xmit_wait, rx_buffer_passed_thres_phy, roce_slow_restart)
    app             an application's own error: information (resp_local_length_error, req_remote_access_errors,
                    req_cqe_flush_error, rnr_nak_retry_err, ...)
    data            traffic volume (port_xmit_data, *_packets, *_bytes, rx_bits_phy, rxe's sent_pkts, ...)
    other           everything else, and every name the sources do not list
    """
    if name.startswith("vport_"):  # mlx5 switchdev representors: the same Q-counters, per vport
        name = name[len("vport_"):]
    if name in _ERRORS:
        return "error"
    if RX_ERR_LANE.match(name) or name == CORRECTED_BITS:
        return "pre_fec"
    if name in _RETRANSMITS:
        return "retransmit"
    if name in _APP:
        return "app"
    if name in _DISCARDS or _PRIO_DISCARD.match(name):
        return "discard"
    if name.endswith("_pause_duration"):
        return "pause_duration"
    if name in _PAUSE or _PRIO_PAUSE.match(name):
        return "pause"
    if name in _CNP or _PRIO_MARKED.match(name):
        return "cnp"
    if name in _WAIT:
        return "wait"
    if name in _DATA or _BYTES_PACKETS.search(name):
        return "data"
    return "other"
