use super::*;

fn bytes(b: &[u8]) -> Vec<Content> {
    vec![Content::Bytes(b.to_vec())]
}

fn written(files: Vec<IsoFile>, boot: &Boot) -> Vec<u8> {
    let plan = plan(files, boot).unwrap();
    let mut out = Vec::new();
    plan.write(&mut out, "TEST", 1_767_225_600).unwrap();
    assert_eq!(
        out.len() as u64,
        plan.size(),
        "the size planned is the size written"
    );
    assert_eq!(out.len() % SECTOR_USIZE, 0);
    out
}

#[test]
fn files_read_back_through_the_volume_descriptor_and_directories() {
    let big: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let dir = std::env::temp_dir().join(format!("bmo-iso-test-{}", std::process::id()));
    std::fs::write(&dir, b"from disk").unwrap();
    let image = written(
        vec![
            IsoFile::new("VMLINUZ", bytes(b"kernel")),
            IsoFile::new(
                "INITRD",
                vec![
                    Content::File {
                        path: dir.clone(),
                        len: 9,
                    },
                    Content::Bytes(big.clone()),
                ],
            ),
            IsoFile::new("EFI/BOOT/GRUB.CFG", bytes(b"menuentry")),
            IsoFile::new("EFI/NOTES.TXT", bytes(b"")),
        ],
        &Boot::default(),
    );
    std::fs::remove_file(&dir).unwrap();
    assert_eq!(find(&image, "VMLINUZ"), Some(&b"kernel"[..]));
    let initrd = find(&image, "INITRD").unwrap();
    assert_eq!(&initrd[..9], b"from disk");
    assert_eq!(&initrd[9..], &big[..]);
    assert_eq!(find(&image, "EFI/BOOT/GRUB.CFG"), Some(&b"menuentry"[..]));
    assert_eq!(find(&image, "EFI/NOTES.TXT"), Some(&b""[..]));
    assert_eq!(find(&image, "EFI/BOOT/NONE.CFG"), None);
    // The primary volume descriptor, then the terminator (no boot record).
    assert_eq!(&image[16 * 2048..16 * 2048 + 6], b"\x01CD001");
    assert_eq!(&image[17 * 2048..17 * 2048 + 6], b"\xffCD001");
    assert_eq!(&image[16 * 2048 + 813..16 * 2048 + 821], b"20260101");
}

#[test]
fn many_files_spill_a_directory_over_sectors_without_splitting_a_record() {
    let files: Vec<IsoFile> = (0..200)
        .map(|i| IsoFile::new(&format!("F{i:07}.BIN"), bytes(format!("{i}").as_bytes())))
        .collect();
    let image = written(files, &Boot::default());
    for i in [0, 57, 58, 199] {
        let name = format!("F{i:07}.BIN");
        assert_eq!(
            find(&image, &name),
            Some(format!("{i}").as_bytes()),
            "{name}"
        );
    }
}

#[test]
fn the_boot_catalog_has_a_bios_default_entry_and_an_efi_section() {
    let loader: Vec<u8> = (0..2048u32).map(|i| (i * 7) as u8).collect();
    let esp = vec![0xEEu8; 4096 + 1];
    let image = written(
        vec![
            IsoFile::new("ISOLINUX/ISOLINUX.BIN", bytes(&loader)),
            IsoFile::new("BOOT/ESP.IMG", bytes(&esp)),
        ],
        &Boot {
            bios: Some("ISOLINUX/ISOLINUX.BIN".into()),
            efi: Some("BOOT/ESP.IMG".into()),
        },
    );
    let record = &image[17 * 2048..18 * 2048];
    assert_eq!(&record[..7], b"\x00CD001\x01");
    assert_eq!(&record[7..30], b"EL TORITO SPECIFICATION");
    let catalog_lba = u32::from_le_bytes(record[71..75].try_into().unwrap()) as usize;
    let catalog = &image[catalog_lba * 2048..catalog_lba * 2048 + 128];
    let sum = catalog[..32].chunks(2).fold(0u16, |s, w| {
        s.wrapping_add(u16::from_le_bytes([w[0], w[1]]))
    });
    assert_eq!(sum, 0, "the validation entry sums to zero");
    assert_eq!(
        (catalog[0], catalog[1], catalog[30], catalog[31]),
        (1, 0, 0x55, 0xAA)
    );
    // Default entry: bootable, no emulation, 4 sectors of the loader.
    let loader_lba = u32::from_le_bytes(catalog[40..44].try_into().unwrap()) as usize;
    assert_eq!(
        (catalog[32], catalog[33], &catalog[38..40]),
        (0x88, 0, &[4u8, 0][..])
    );
    let on_disk = find(&image, "ISOLINUX/ISOLINUX.BIN").unwrap();
    assert_eq!(on_disk.as_ptr(), image[loader_lba * 2048..].as_ptr());
    // The boot information table: PVD at 16, its own LBA and length, the checksum.
    let word = |o: usize| u32::from_le_bytes(on_disk[o..o + 4].try_into().unwrap());
    assert_eq!(word(8), 16);
    assert_eq!(word(12) as usize, loader_lba);
    assert_eq!(word(16), 2048);
    let sum = loader[64..].chunks(4).fold(0u32, |s, w| {
        s.wrapping_add(u32::from_le_bytes(w.try_into().unwrap()))
    });
    assert_eq!(word(20), sum);
    assert_eq!(
        &on_disk[64..],
        &loader[64..],
        "the rest is the loader as given"
    );
    // The final section: one EFI entry with the ESP's size in 512-byte sectors.
    assert_eq!((catalog[64], catalog[65], catalog[66]), (0x91, 0xEF, 1));
    assert_eq!((catalog[96], &catalog[102..104]), (0x88, &[9u8, 0][..]));
    let esp_lba = u32::from_le_bytes(catalog[104..108].try_into().unwrap()) as usize;
    assert_eq!(&image[esp_lba * 2048..esp_lba * 2048 + esp.len()], &esp[..]);
}

#[test]
fn an_efi_image_alone_is_the_default_entry_of_an_efi_catalog() {
    let image = written(
        vec![IsoFile::new("ESP.IMG", bytes(&[1; 512]))],
        &Boot {
            bios: None,
            efi: Some("ESP.IMG".into()),
        },
    );
    let record = &image[17 * 2048..18 * 2048];
    let lba = u32::from_le_bytes(record[71..75].try_into().unwrap()) as usize;
    let catalog = &image[lba * 2048..lba * 2048 + 64];
    assert_eq!((catalog[1], catalog[32], catalog[38]), (0xEF, 0x88, 1));
}

#[test]
fn names_outside_level_1_and_missing_boot_files_are_refused() {
    for path in ["vmlinuz", "TOOLONGNAME", "A/B.TOOLONG", "A B", "", "DIR/"] {
        assert!(
            matches!(
                plan(vec![IsoFile::new(path, bytes(b"x"))], &Boot::default()),
                Err(IsoError::BadName(_))
            ),
            "{path:?}"
        );
    }
    let twice = vec![
        IsoFile::new("A.B", bytes(b"x")),
        IsoFile::new("A.B", bytes(b"y")),
    ];
    assert_eq!(
        plan(twice, &Boot::default()).unwrap_err(),
        IsoError::Duplicate("A.B".into())
    );
    let boot = Boot {
        bios: Some("NONE.BIN".into()),
        efi: None,
    };
    assert_eq!(
        plan(vec![IsoFile::new("A", bytes(b"x"))], &boot).unwrap_err(),
        IsoError::NoBootFile("NONE.BIN".into())
    );
    let short = Boot {
        bios: Some("L.BIN".into()),
        efi: None,
    };
    assert!(matches!(
        plan(vec![IsoFile::new("L.BIN", bytes(b"tiny"))], &short),
        Err(IsoError::BiosLoader(_))
    ));
}

#[test]
fn unix_times_become_civil_dates() {
    assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
    assert_eq!(civil(951_782_400), (2000, 2, 29, 0, 0, 0));
    assert_eq!(civil(1_767_225_599), (2025, 12, 31, 23, 59, 59));
}
