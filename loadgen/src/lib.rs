//! The sluice load generator. Not written yet: see the issue "Load generator".
