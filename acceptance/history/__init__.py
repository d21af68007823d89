"""The store of nights: every link's, NIC's, node's and rail's series across runs (store), what a run
folder gives it (night), physical identities (identity), and the night judged against its history
(judge: drift, intermittent, recovered, fleet trend). docs/history.md says why it is built this way."""
