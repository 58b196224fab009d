//! Device and link catalog, roofline costs, cycle-level systolic array and communication number formats.
