//! Node-agent protocol, server side (seed 000 §4.3 WaitForAgentEnrollment, §5.6, seed 001 §8):
//! enrollment tokens and the typed task queue with leases.
