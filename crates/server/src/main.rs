mod config;

fn main() {}
