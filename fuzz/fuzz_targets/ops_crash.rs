#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hrafn_fuzz::ops_crash(data));
