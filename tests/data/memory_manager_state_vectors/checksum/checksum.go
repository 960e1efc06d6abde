package checksum

type Checksum uint64
