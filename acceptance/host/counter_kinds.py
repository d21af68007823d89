"""What a port counter means for a verdict (its kind), by name: errors, discards, pause frames,
congestion notifications, traffic. Used by the counters (acceptance.host.counters) and by the one judge
(acceptance.rules.judge), which holds each kind to its bound."""

from __future__ import annotations

import re

KINDS = ("error", "retransmit", "pre_fec", "discard", "pause", "pause_duration", "cnp", "wait", "data", "other")
# hw_counters named req_*_error(s) / resp_*_error(s) (mlx5 and rxe): transport errors
REQ_RESP_ERROR = re.compile(r"^(?:req|resp)_\w+_errors?$")
CNP_COUNTERS = frozenset(("np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "np_ecn_marked_roce_packets"))
_ERRORS = frozenset((
    # PMA: a rising one means a degraded link (or a misconfigured partition)
    "symbol_error", "port_rcv_errors", "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "link_error_recovery", "link_downed", "port_xmit_constraint_errors", "port_rcv_constraint_errors",
    "local_link_integrity_errors", "excessive_buffer_overrun_errors",
    # mlx5 Q-counters: transport errors (retries exhausted: the queue pair failed)
    "rnr_nak_retry_err", "req_rnr_retries_exceeded", "req_transport_retries_exceeded",
    # rxe (Soft-RoCE) hw_counters: transport errors
    "retry_exceeded_err", "retry_rnr_exceeded_err", "send_err",
    # mlx5 ethtool PHY counters after FEC (Documentation/networking/device_drivers/ethernet/mellanox/
    # mlx5/counters.rst: rx_symbol_err_phy and rx_pcs_symbol_err_phy count symbol errors FEC did not
    # correct, rx_crc_errors_phy packets with a bad CRC; net/mlx5e commit 5db0a4f64c04): traffic was lost
    "rx_crc_errors_phy", "rx_symbol_err_phy", "rx_pcs_symbol_err_phy", "link_down_events_phy",
    "tx_pause_storm_warning_events", "tx_pause_storm_error_events",
))
# Retransmissions: a lost, late or out-of-order packet or ACK, recovered by the transport. Judged
# against the port's traffic in the same window (counters.retransmit_ppm_max), not as a bare count.
_RETRANSMITS = frozenset((
    # mlx5 Q-counters
    "out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "implied_nak_seq_err",
    # rxe hw_counters (mlx5 has duplicate_request too)
    "completer_retry_err", "rcvd_seq_err", "out_of_seq_request", "duplicate_request",
))
# The packets a port sent and received, per driver (the first pair a port has is its traffic).
PACKET_COUNTERS = (("sent_pkts", "rcvd_pkts"), ("port_xmit_packets", "port_rcv_packets"),
                   ("unicast_xmit_packets", "unicast_rcv_packets"))
_DISCARDS = frozenset((
    "port_xmit_discards", "rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer", "out_of_buffer",
    # dropped subnet-management packets: lost SMPs, not a link-quality signal, so a warning
    "VL15_dropped",
))
_PAUSE = frozenset(("rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_global_pause", "tx_global_pause"))
_DATA = frozenset((
    "port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets",
    "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets", "rx_bits_phy",
    "rx_write_requests", "rx_read_requests", "rx_atomic_requests",
    # rxe hw_counters
    "sent_pkts", "rcvd_pkts", "rdma_sends", "rdma_recvs",
))
# Errors before FEC corrects them (mlx5 counters.rst: rx_err_lane_<l>_phy "error bits identified on
# lane l; when FEC is enabled this induces corrected errors", rx_corrected_bits_phy "corrected bits
# according to active FEC"). PAM4 links (50G a lane and up: 200, 400, 800G ports) always have them
# (IEEE 802.3 holds such a link to a pre-FEC BER of 2.4e-4 or better, and RS(544,514) FEC to a BER of
# 1e-12 after it: Dell KB 000286734 on ConnectX-6 Dx): judged as a bit error rate against the port's
# rx_bits_phy, never as a count.
RX_ERR_LANE = re.compile(r"^rx_err_lane_\d+_phy$")
CORRECTED_BITS = "rx_corrected_bits_phy"
BITS_COUNTER = "rx_bits_phy"
_PRIO_DISCARD = re.compile(r"^rx_prio\d+_(?:discards|buf_discard|cong_discard)$")
_PRIO_PAUSE = re.compile(r"^(?:rx|tx)_prio\d+_pause(?:_transition)?$")
_BYTES_PACKETS = re.compile(r"_(?:bytes|packets)(?:_phy)?$")


def kind_of(name: str) -> str:
    """What a counter means for a verdict: one of KINDS.

    error           must not rise (symbol_error, link_downed, rx_crc_errors_phy, retry_exceeded_err, ...)
    retransmit      recovered retransmissions, judged per million packets of the port (out_of_sequence,
                    packet_seq_err, local_ack_timeout_err, and rxe's completer_retry_err, duplicate_request, ...)
    discard         dropped packets (port_xmit_discards, rx_discards_phy, rx_prioN_discards, out_of_buffer)
    pause           PFC / global pause frames (rx_prio3_pause, tx_pause_ctrl_phy, rx_prioN_pause_transition)
    pause_duration  time spent paused, microseconds (*_pause_duration)
    cnp             congestion notifications (np_cnp_sent, rp_cnp_handled, rp_cnp_ignored, np_ecn_marked_...)
    wait            port_xmit_wait: ticks with data to send and no credits (back-pressure)
    pre_fec         bit errors before FEC (rx_err_lane_<l>_phy, rx_corrected_bits_phy): judged as a pre-FEC
                    bit error rate against the port's rx_bits_phy
    data            traffic volume (port_xmit_data, *_packets, *_bytes, rx_bits_phy, rxe's sent_pkts, ...)
    other           everything else
    """
    if name in _ERRORS:
        return "error"
    if RX_ERR_LANE.match(name) or name == CORRECTED_BITS:
        return "pre_fec"
    if name in _RETRANSMITS:
        return "retransmit"
    if name.endswith("_flush_error"):  # QPs torn down with work requests posted: normal at teardown
        return "other"
    if REQ_RESP_ERROR.match(name):
        return "error"
    if name in _DISCARDS or _PRIO_DISCARD.match(name):
        return "discard"
    if name.endswith("_pause_duration"):
        return "pause_duration"
    if name in _PAUSE or _PRIO_PAUSE.match(name):
        return "pause"
    if name in CNP_COUNTERS:
        return "cnp"
    if name == "port_xmit_wait":
        return "wait"
    if name in _DATA or _BYTES_PACKETS.search(name):
        return "data"
    return "other"
