//! iPXE scripts bmo serves when Ironic has not written them into its http_root.

/// Chains Ironic's `pxelinux.cfg/<mac>` for each NIC, then `inspector.ipxe`.
pub const BOOT_SCRIPT: &str = include_str!("../../assets/ipxe/boot.ipxe");

const INSPECTOR_TEMPLATE: &str = include_str!("../../assets/ipxe/inspector.ipxe");

/// The fallback script for unknown MACs: boots the deploy kernel and ramdisk.
pub fn inspector_script(kernel_url: &str, ramdisk_url: &str, kernel_params: &str) -> String {
    INSPECTOR_TEMPLATE
        .replace("{{kernel_url}}", &sanitize(kernel_url))
        .replace("{{ramdisk_url}}", &sanitize(ramdisk_url))
        .replace("{{kernel_params}}", &sanitize(kernel_params))
}

/// Keeps a configured value on its one script line.
fn sanitize(v: &str) -> String {
    v.chars().filter(|c| *c != '\n' && *c != '\r').collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspector_script_fills_urls_and_params() {
        let s = inspector_script(
            "http://10.0.0.1:6180/images/k",
            "http://10.0.0.1:6180/images/r",
            "console=ttyS0\nx",
        );
        assert!(s.starts_with("#!ipxe\n"));
        assert!(s.contains("kernel --timeout 60000 http://10.0.0.1:6180/images/k initrd=deploy-ramdisk BOOTIF=${mac} console=ttyS0x ||"));
        assert!(s.contains(
            "initrd --name deploy-ramdisk --timeout 60000 http://10.0.0.1:6180/images/r ||"
        ));
        assert!(!s.contains("{{"));
    }
}
