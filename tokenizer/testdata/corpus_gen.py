"""Deterministic text and chat corpora for the tokenizer conformance fixtures.

Imported by gen_conformance.py; nothing here calls a tokenizer. Every choice comes
from random.Random(seed), so the corpora are identical on every machine.
"""
import json
import random

PROSE = {
    "en": ["The quick brown fox jumps over the lazy dog.", "I'm sure they'll say it's fine, but we've seen otherwise.",
           "Prices rose 3.5% in Q3 2024, the BIGGEST jump since '08.", "Don't you think the U.S.A. isn't what it WAS?"],
    "de": ["Größere Straßen führen über die Brücke nach Köln.", "Die Äpfel schmecken süß, aber die Übung macht den Meister."],
    "fr": ["L'été dernier, nous étions à Paris — c'était magnifique !", "Où est la bibliothèque ? Je l'ai cherchée partout."],
    "es": ["¿Dónde está el baño? ¡Necesito saberlo ya!", "El niño comió paella y bebió jugo de piña."],
    "pt": ["Não sei se você já viu, mas a ação está em alta.", "Coração, pão e limão são palavras com til."],
    "it": ["Perché non andiamo al mare domani? Sarà bellissimo.", "L'università è più vicina di quanto pensassi."],
    "pl": ["Zażółć gęślą jaźń — to zdanie zawiera polskie znaki.", "Chrząszcz brzmi w trzcinie w Szczebrzeszynie."],
    "tr": ["Işık ılık süt içti; İstanbul'da hava güzeldi.", "Çok güzel bir gün geçirdik, teşekkür ederim."],
    "ru": ["Съешь же ещё этих мягких французских булок, да выпей чаю.", "Москва — столица России, а Нева течёт в Петербурге."],
    "uk": ["Чуєш їх, доцю, га? Кумедна ж ти, прощайся без ґольфів!"],
    "el": ["Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.", "ΣΊΣΥΦΟΣ και σίσυφος: τελικό σίγμα ς."],
    "ar": ["مرحبا بالعالم! كيف حالك اليوم؟", "اللغة العربية جميلة جدًا، وهي لغة القرآن."],
    "he": ["שלום עולם, מה שלומך היום?", "עברית נכתבת מימין לשמאל."],
    "fa": ["سلام دنیا! امروز هوا خوب است."],
    "hi": ["नमस्ते दुनिया! आप कैसे हैं?", "हिन्दी भाषा देवनागरी लिपि में लिखी जाती है।"],
    "bn": ["আমি বাংলায় গান গাই।", "বাংলাদেশের রাজধানী ঢাকা।"],
    "ta": ["வணக்கம் உலகம்! நீங்கள் எப்படி இருக்கிறீர்கள்?"],
    "th": ["สวัสดีชาวโลก วันนี้อากาศดีมาก", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ"],
    "zh": ["你好，世界！今天天气很好。", "机器学习是人工智能的一个分支，深度学习又是机器学习的一个分支。", "《红楼梦》是中国古典四大名著之一。"],
    "ja": ["こんにちは世界！今日はいい天気ですね。", "東京スカイツリーは634メートルです。カタカナとひらがな。"],
    "ko": ["안녕하세요 세계! 오늘 날씨가 좋네요.", "한국어는 한글로 씁니다. 감사합니다."],
    "vi": ["Xin chào thế giới! Hôm nay trời đẹp quá.", "Tiếng Việt có nhiều dấu thanh điệu."],
    "ka": ["გამარჯობა მსოფლიო!"], "hy": ["Բարեւ աշխարհ, ինչպես ես։"], "am": ["ሰላም ልዑል! እንዴት ነህ?"],
    "my": ["မင်္ဂလာပါ ကမ္ဘာလောက"], "km": ["សួស្តី​ពិភពលោក"], "si": ["ආයුබෝවන් ලෝකය"],
    "yi": ["שלום וועלט"], "mn": ["Сайн байна уу, дэлхий!"], "eo": ["Ĉu vi parolas Esperanton? Ĝi estas facila."],
}

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "func main() {\n\tfmt.Println(\"hello, 世界\")\n\tfor i := 0; i < 10; i++ {\n\t\tx += i << 2\n\t}\n}\n",
    "const f = async (a, b) => { await sleep(100); return a?.b ?? `${b}!`; };",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%ann%' ORDER BY id DESC;",
    "<div class=\"x\" id='y'><p>Hello&nbsp;<b>world</b></p><!-- comment --></div>",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do wc -l \"$f\"; done 2>&1 | sort -n\n",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\\n\"}}",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "impl<T: Clone> Foo<T> { fn bar(&self) -> Option<&T> { self.0.get(0) } }",
    "    \t  mixed   indentation\n\t\tline\r\n  windows line\r\n",
    "x = [i**2 for i in range(100) if i % 3 == 0]  # list comprehension",
    "@decorator\nclass A(B, metaclass=M):\n    '''Docstring.'''\n    __slots__ = ('a',)\n",
]

SPECIAL_TEXT = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>",
                "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<think>", "</think>",
                "<tool_call>", "</tool_call>", "<|reserved_special_token_5|>", "<|im_", "<|", "|>",
                "<|fim_prefix|>", "<|vision_start|>", "<s>", "</s>", "[INST]", "<unk>"]

WHITESPACE = [" ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\v", "\f", "\x85", "\xa0", "\u1680", "\u2000",
              "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009",
              "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u200b", "\ufeff", "\u180e",
              " \n ", "\n \n", "   \n\n\t"]

EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "❤️", "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "✊🏾", "🫠", "1️⃣",
         "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "☺︎", "🐈‍⬛", "🤷‍♀️", "🔥🔥🔥", "😂😂"]

BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
          (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x1E00, 0x1EFF), (0x2000, 0x206F),
          (0x2100, 0x22FF), (0x2460, 0x24FF), (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xACFF),
          (0xFF00, 0xFFEF), (0x1F300, 0x1F64F), (0x1D400, 0x1D4FF), (0x10000, 0x1007F), (0xE000, 0xE00F),
          # Unicode 16.0 additions (Go 1.26's tables are 15.0): Egyptian Hieroglyphs
          # Extended-A, Garay, Tulu-Tigalari, Kirat Rai, Todhri, and unassigned space.
          (0x13460, 0x134FF), (0x10D40, 0x10D8F), (0x11380, 0x113FF), (0x16D40, 0x16D7F), (0x105C0, 0x105FF),
          (0x2FA20, 0x2FA3F)]


def rand_unicode(rng, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(BLOCKS)
        cp = rng.randint(lo, hi)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0x41
        out.append(chr(cp))
    return "".join(out)


def number_text(rng):
    kinds = [
        lambda: str(rng.randint(0, 10 ** rng.randint(1, 25))),
        lambda: f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}",
        lambda: f"{rng.randint(1, 12)}/{rng.randint(1, 28)}/{rng.randint(1900, 2100)}",
        lambda: f"+1 ({rng.randint(200, 999)}) {rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
        lambda: "".join(rng.choice("0123456789") for _ in range(rng.randint(20, 200))),
        lambda: "٠١٢٣٤٥٦٧٨٩ ０１２３ ¹²³ ½ ⅓ Ⅻ ①②",
        lambda: f"{rng.randint(1, 999)},{rng.randint(100, 999)},{rng.randint(100, 999)}.{rng.randint(0, 99):02d}",
        lambda: f"0x{rng.getrandbits(64):x} 0b{rng.getrandbits(12):b} {rng.random():e}",
        lambda: f"v{rng.randint(0, 9)}.{rng.randint(0, 99)}.{rng.randint(0, 999)}-rc{rng.randint(1, 5)}",
    ]
    return " ".join(rng.choice(kinds)() for _ in range(rng.randint(1, 4)))


def prose(rng, k=None):
    k = k or rng.randint(1, 4)
    parts = []
    for _ in range(k):
        lang = rng.choice(sorted(PROSE))
        parts.append(rng.choice(PROSE[lang]))
    sep = rng.choice([" ", "\n", "\n\n", "  ", "\t"])
    return sep.join(parts)


def control_text(rng):
    chars = [chr(c) for c in list(range(0, 32)) + [127] + list(range(0x80, 0xA0))]
    base = prose(rng, 1)
    out = []
    for ch in base:
        out.append(ch)
        if rng.random() < 0.15:
            out.append(rng.choice(chars))
    return "".join(out)


def special_text(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        parts.append(rng.choice([rng.choice(SPECIAL_TEXT), prose(rng, 1), rng.choice(WHITESPACE), rng.choice(EMOJI)]))
    return rng.choice(["", " "]).join(parts)


def whitespace_text(rng):
    parts = []
    for _ in range(rng.randint(2, 8)):
        parts.append(rng.choice([rng.choice(WHITESPACE) * rng.randint(1, 4), rng.choice(["word", "x", "1", "é", "語", ".", "'s"])]))
    return "".join(parts)


def emoji_text(rng):
    return "".join(rng.choice(EMOJI + [" ", "a", "。", "\n"]) for _ in range(rng.randint(1, 12)))


def long_word(rng):
    kinds = [
        lambda: rng.choice("abcdefghij") * rng.randint(100, 3000),
        lambda: "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(100, 2000))),
        lambda: "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(rng.randint(100, 1500))),
        lambda: "https://example.com/" + "/".join("seg%d" % i for i in range(rng.randint(10, 80))) + "?q=a&b=c#frag",
        lambda: "语" * rng.randint(50, 800),
        lambda: "😀" * rng.randint(20, 300),
        lambda: "-" * rng.randint(50, 500) + "=" * rng.randint(1, 50),
        lambda: " " * rng.randint(50, 2000) + "x",
        lambda: "\n" * rng.randint(10, 300),
    ]
    return rng.choice(kinds)()


def nfc_text(rng):
    combos = ["e\u0301", "a\u0308", "A\u030a", "\u1100\u1161\u11a8", "n\u0303", "o\u0302\u0323", "\u212b", "\u2126",
              "ﬁ", "ｶ\uff9e", "e\u0301\u0301", "\u0341", "\u0958", "\u2460"]
    return "".join(rng.choice(combos + [" ", "word"]) for _ in range(rng.randint(1, 10)))


def contraction_text(rng):
    words = ["I'M", "you'RE", "it'S", "we'VE", "they'LL", "he'D", "don't", "'s", "'t", "''", "'''", "O'Neil", "rock'n'roll", "ʼs", "’s"]
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))


GENERATORS = [
    (prose, 18), (lambda r: rng_code(r), 10), (number_text, 8), (emoji_text, 6), (whitespace_text, 10),
    (control_text, 6), (special_text, 10), (long_word, 3), (lambda r: rand_unicode(r, r.randint(1, 60)), 12),
    (nfc_text, 6), (contraction_text, 5), (lambda r: mix(r), 6),
]


def rng_code(rng):
    s = rng.choice(CODE)
    if rng.random() < 0.5:
        s = s.replace("    ", rng.choice(["  ", "\t", "        "]))
    return s


def mix(rng):
    fns = [prose, rng_code, number_text, emoji_text, whitespace_text, special_text, nfc_text, contraction_text]
    return "".join(rng.choice(fns)(rng) for _ in range(rng.randint(2, 5)))


def text_corpus(n=5200, seed=20260702):
    rng = random.Random(seed)
    total = sum(w for _, w in GENERATORS)
    out = ["", " ", "\n", "a", "I'm", "<|im_start|>", "<|begin_of_text|>"]
    while len(out) < n:
        x = rng.uniform(0, total)
        for fn, w in GENERATORS:
            x -= w
            if x <= 0:
                out.append(fn(rng))
                break
    return out


TOOL_NAMES = ["get_weather", "search_web", "run_sql", "send_email", "calc", "translate", "book_flight", "récupérer_données"]


def json_schema(rng, depth=0):
    props = {}
    for i in range(rng.randint(1, 4)):
        kind = rng.choice(["string", "integer", "number", "boolean", "array", "object", "enum"])
        name = rng.choice(["city", "query", "limit", "units", "date", "to", "body", "expr", "lang", "opts", "ids", "名前"]) + ("" if i == 0 else str(i))
        if kind == "object" and depth < 2:
            p = json_schema(rng, depth + 1)
        elif kind == "array":
            p = {"type": "array", "items": {"type": rng.choice(["string", "integer"])}, "maxItems": rng.randint(1, 10)}
        elif kind == "enum":
            p = {"type": "string", "enum": rng.sample(["celsius", "fahrenheit", "kelvin", "auto", "ünïcode", "<tag>", "a&b"], 3)}
        else:
            p = {"type": "string" if kind == "object" else kind}
            if rng.random() < 0.5:
                p["description"] = prose(rng, 1)
            if kind == "number" and rng.random() < 0.5:
                p["minimum"] = rng.choice([0.0, 1.5, -1e-7, 1e21, 3.0])
            if kind == "integer" and rng.random() < 0.5:
                p["default"] = rng.randint(-5, 10 ** 12)
        props[name] = p
    out = {"type": "object", "properties": props}
    if rng.random() < 0.7:
        out["required"] = sorted(props)[: rng.randint(1, len(props))]
    return out


def make_tool(rng):
    fn = {"name": rng.choice(TOOL_NAMES)}
    if rng.random() < 0.1:
        fn["strict"] = rng.random() < 0.5
    if rng.random() < 0.85:
        fn["description"] = rng.choice([prose(rng, 1), "Line one.\nLine two with \"quotes\" and \\backslash.", "Emoji 🚀 and </tool_call> text"])
    if rng.random() < 0.9:
        fn["parameters"] = json_schema(rng)
    return {"type": "function", "function": fn}


def message_text(rng):
    return rng.choice([prose, rng_code, number_text, emoji_text, special_text, whitespace_text, mix, contraction_text])(rng)


def content_value(rng):
    if rng.random() < 0.75:
        return message_text(rng)
    return [{"type": "text", "text": message_text(rng)} for _ in range(rng.randint(1, 3))]


def random_args(rng):
    args = {}
    for _ in range(rng.randint(0, 3)):
        args[rng.choice(["city", "q", "n", "flag", "x", "unicode", "nested"])] = rng.choice(
            [prose(rng, 1), rng.randint(-100, 10 ** 6), rng.random() * 100, True, False, None, [1, "two", 3.0], {"k": "v", "ä": [1.5e-7]}])
    return args


def conversation(rng, idx):
    msgs = []
    tools = [make_tool(rng) for _ in range(rng.randint(1, 3))] if rng.random() < 0.35 else None
    if rng.random() < 0.6:
        msgs.append({"role": "system", "content": content_value(rng) if rng.random() < 0.9 else "You are a helpful assistant."})
    turns = rng.randint(1, 8)
    for t in range(turns):
        msgs.append({"role": "user", "content": content_value(rng)})
        last = t == turns - 1
        if last and rng.random() < 0.7:
            break
        if tools and rng.random() < 0.5:
            calls = []
            for c in range(rng.randint(1, 2)):
                calls.append({"id": f"call_{idx}_{t}_{c}", "type": "function",
                              "function": {"name": rng.choice(tools)["function"]["name"],
                                           "arguments": json.dumps(random_args(rng), ensure_ascii=rng.random() < 0.5)}})
            msgs.append({"role": "assistant", "content": rng.choice([None, "", "Let me check."]), "tool_calls": calls})
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": rng.choice([json.dumps(random_args(rng)), message_text(rng)])})
        reply = message_text(rng)
        if rng.random() < 0.2:
            reply = "<think>\n" + prose(rng, 1) + "\n</think>\n\n" + reply
        am = {"role": "assistant", "content": reply}
        r = rng.random()
        if r < 0.1:
            am["reasoning_content"] = prose(rng, 1)
        elif r < 0.2:
            am["reasoning"] = "\n" + prose(rng, 1) + "\n"
        msgs.append(am)
    req = {"model": "m", "messages": msgs}
    if tools:
        req["tools"] = tools
    r = rng.random()
    if r < 0.8:
        req["add_generation_prompt"] = True
    elif r < 0.9:
        req["add_generation_prompt"] = False
    if rng.random() < 0.3:
        req["chat_template_kwargs"] = {"enable_thinking": rng.random() < 0.5}
    return req


def chat_corpus(n=330, seed=20260703):
    rng = random.Random(seed)
    return [conversation(rng, i) for i in range(n)]
