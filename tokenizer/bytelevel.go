package tokenizer

import "unicode/utf8"

// byteToRune is the GPT-2 byte-level alphabet: printable Latin-1 bytes map to
// themselves, the others to U+0100 and up, so every byte has a visible character.
var byteToRune = func() [256]rune {
	var t [256]rune
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = 256 + n
			n++
		}
	}
	return t
}()

// runeByte inverts byteToRune over U+0000..U+01FF; -1 marks runes outside it.
var runeByte = func() [0x200]int16 {
	var t [0x200]int16
	for i := range t {
		t[i] = -1
	}
	for b, r := range byteToRune {
		t[r] = int16(b)
	}
	return t
}()

// runeToByte inverts byteToRune; runes outside the alphabet map to -1.
func runeToByte(r rune) int {
	if r < 0 || r >= 0x200 {
		return -1
	}
	return int(runeByte[r])
}

// decodeByteLevel turns a byte-level vocabulary entry back into the raw bytes it
// stands for. ok is false when the entry holds a rune outside the alphabet.
func decodeByteLevel(tok string) (string, bool) {
	buf := make([]byte, 0, len(tok))
	for _, r := range tok {
		if r == utf8.RuneError {
			return "", false
		}
		b := runeToByte(r)
		if b < 0 {
			return "", false
		}
		buf = append(buf, byte(b))
	}
	return string(buf), true
}
