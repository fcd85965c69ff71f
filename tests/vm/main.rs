//! The real-machine tests, a binary of their own so that they run apart from the other
//! crates (docs/try-on-a-vm.md): `vm_e2e` (deploys through the real agent),
//! `vm_servicing` (a VM that boots nothing, serviced through its BMC), `vm_vmedia`
//! (virtual media on a network without DHCP, static addresses), `vm_iso` (the ISO
//! bmo builds boots under BIOS and UEFI), `vm_ipv6` (a UEFI VM network-booted over
//! IPv6 only, deployed and deprovisioned), `lab` their network and daemons, `vbmc` an
//! IPMI BMC (VirtualBMC) for a lab VM, `watch` a host's states, `dhcp_watch` the
//! packets on the lab's bridge.
//! One lab runs at a time (each starts the machine's one system libvirtd), so
//! `vm_servicing` and `vm_vmedia` take the lock alone; so does `vm_iso` (it starts no
//! lab, but two TCG VMs beside a lab would slow both).

// Tests may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod dhcp_watch;
mod externally_provisioned;
mod forced_detach;
mod lab;
mod live_iso;
mod re_inspection;
mod vbmc;
mod vm_e2e;
mod vm_ipv6;
mod vm_iso;
mod vm_servicing;
mod vm_vmedia;
mod watch;
