//! One request's own cost: Edit, Grep, paths and patterns.
