"""The store of nights: every link's, NIC's, node's and rail's series across runs (store), what a run
folder gives it (night), component names and physical identities (components), and a night's findings
against its history (findings: drift, intermittent, recovered, fleet trend; acceptance.rules.judge is the
one judge of a value against a bound). docs/history.md says why it is built this way."""
