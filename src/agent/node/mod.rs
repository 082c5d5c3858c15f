//! The node agent (`metalform agent`): placeholder, filled in below.
