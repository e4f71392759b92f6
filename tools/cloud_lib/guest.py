# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""A guest that keeps a live migration running: it dirties its memory.

The cloud's image is a few KB of zeros: QEMU's BIOS finds no boot
sector and the guest sits idle, its memory all zero pages, which a live
migration sends as flags: it ends within a second of ``running``. To
abort a live migration *while it runs* (the rollback of bug 1894095 at
natural timing) the migration must not converge, as it does not for a
guest with a busy database: this image's boot sector writes one word of
every 4 KiB page from 2 MiB to 96 MiB, again and again, with a counter
(so no page is a zero page and every page is dirty again within
milliseconds). Nova's first downtime step allows 50 ms for 150 s
(``live_migration_downtime`` / ``_steps``, ``_delay`` x 2 GiB), which
the ~94 MiB left dirty never fits in: the migration stays ``running``
until it is aborted (or, much later, Nova's completion time-out).

The guest busies one host CPU while it runs (QEMU's TCG), so the family
boots it for its abort steps only and deletes it after.

The boot sector, GNU as (``as --32``, ``ld -m elf_i386 -Ttext 0x7c00
--oformat binary``)::

        .code16
    _start:
        cli
        xorw  %ax, %ax
        movw  %ax, %ds
        movw  %ax, %ss
        movw  $0x7c00, %sp
        inb   $0x92, %al            # fast A20: memory above 1 MiB
        orb   $2, %al
        outb  %al, $0x92
        lgdtl gdtr                  # enter protected mode to load a
        movl  %cr0, %eax            # 4 GiB data segment into %ds ...
        orb   $1, %al
        movl  %eax, %cr0
        movw  $8, %bx
        movw  %bx, %ds
        andb  $0xfe, %al            # ... and leave it: "unreal" mode,
        movl  %eax, %cr0            # real mode with 32-bit offsets
        xorw  %ax, %ax
        movw  %ax, %ds
        movl  $1, %ecx
    sweep:
        movl  $0x200000, %esi       # 2 MiB
    page:
        addr32 movl %ecx, (%esi)    # one word of the page
        addl  $4096, %esi
        cmpl  $0x6000000, %esi      # 96 MiB: below any flavor's RAM
        jb    page
        incl  %ecx
        jmp   sweep
        .p2align 3
    gdt:
        .quad 0
        .quad 0x00cf92000000ffff    # flat data, 4 GiB, writable
    gdtr:
        .word gdtr - gdt - 1
        .long gdt
        .org  510
        .word 0xaa55
"""

#: the image's name in glance
DIRTY_IMAGE_NAME = 'nrl-dirty-memory'

#: the assembled boot sector above, up to the GDT's pointer (0x66)
_CODE = bytes.fromhex(
    'fa31c08ed88ed0bc007ce4920c02e692'
    '660f0116607c0f20c00c010f22c0bb08'
    '008edb24fe0f22c031c08ed866b90100'
    '000066be000020006766890e6681c600'
    '1000006681fe0000000672ec6641ebe2'
    '0000000000000000ffff00000092cf00'
    '0f00507c0000')


def boot_sector():
    """The 512 bytes of the guest's disk's first sector."""
    sector = bytearray(512)
    sector[:len(_CODE)] = _CODE
    sector[510:512] = b'\x55\xaa'
    return bytes(sector)


def image_bytes(size=4096):
    """A raw disk image: the boot sector, then zeros."""
    return boot_sector() + b'\0' * (size - 512)
