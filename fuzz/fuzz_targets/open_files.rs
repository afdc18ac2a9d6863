#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hrafn_fuzz::open_files(data));
