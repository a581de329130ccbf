//! (in progress)
pub fn main() -> i32 { eprintln!("ttdb: no commands yet"); 2 }
