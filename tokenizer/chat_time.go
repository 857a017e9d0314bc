package tokenizer

// strftime for transformers' strftime_now global, which Llama 3.1+ templates
// call for "Today Date: 26 Jul 2024". Python hands the format to the C
// library; this follows glibc in the C locale, including its flags ("%-d" for
// an unpadded day), for a naive datetime (so %z and %Z are empty).

import (
	"strconv"
	"strings"
	"time"
)

func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		start := i
		i++
		var flag byte
		if strings.IndexByte("-_0^#", format[i]) >= 0 && i+1 < len(format) {
			flag = format[i]
			i++
		}
		text, ok := strftimeField(t, format[i], flag)
		if !ok {
			b.WriteString(format[start : i+1])
			continue
		}
		if flag == '^' {
			text = strings.ToUpper(text)
		}
		b.WriteString(text)
	}
	return b.String()
}

// strftimeField formats one conversion; ok is false for letters glibc does
// not know, which are copied through.
func strftimeField(t time.Time, verb, flag byte) (text string, ok bool) {
	num := func(value, width int, pad byte) string {
		switch flag {
		case '-':
			return strconv.Itoa(value)
		case '_':
			pad = ' '
		case '0':
			pad = '0'
		}
		s := strconv.Itoa(value)
		for len(s) < width {
			s = string(pad) + s
		}
		return s
	}
	hour12 := t.Hour() % 12
	if hour12 == 0 {
		hour12 = 12
	}
	switch verb {
	case 'a':
		return t.Format("Mon"), true
	case 'A':
		return t.Format("Monday"), true
	case 'b', 'h':
		return t.Format("Jan"), true
	case 'B':
		return t.Format("January"), true
	case 'c':
		return t.Format("Mon Jan _2 15:04:05 2006"), true
	case 'C':
		return num(t.Year()/100, 2, '0'), true
	case 'd':
		return num(t.Day(), 2, '0'), true
	case 'D':
		return t.Format("01/02/06"), true
	case 'e':
		return num(t.Day(), 2, ' '), true
	case 'f':
		return num(t.Nanosecond()/1000, 6, '0'), true
	case 'F':
		return t.Format("2006-01-02"), true
	case 'g':
		year, _ := t.ISOWeek()
		return num(year%100, 2, '0'), true
	case 'G':
		year, _ := t.ISOWeek()
		return num(year, 1, '0'), true
	case 'H':
		return num(t.Hour(), 2, '0'), true
	case 'I':
		return num(hour12, 2, '0'), true
	case 'j':
		return num(t.YearDay(), 3, '0'), true
	case 'k':
		return num(t.Hour(), 2, ' '), true
	case 'l':
		return num(hour12, 2, ' '), true
	case 'm':
		return num(int(t.Month()), 2, '0'), true
	case 'M':
		return num(t.Minute(), 2, '0'), true
	case 'n':
		return "\n", true
	case 'p':
		return t.Format("PM"), true
	case 'P':
		return strings.ToLower(t.Format("PM")), true
	case 'r':
		return t.Format("03:04:05 PM"), true
	case 'R':
		return t.Format("15:04"), true
	case 's':
		return strconv.FormatInt(t.Unix(), 10), true
	case 'S':
		return num(t.Second(), 2, '0'), true
	case 't':
		return "\t", true
	case 'T', 'X':
		return t.Format("15:04:05"), true
	case 'u':
		return num((int(t.Weekday())+6)%7+1, 1, '0'), true
	case 'U':
		return num((t.YearDay()+6-int(t.Weekday()))/7, 2, '0'), true
	case 'V':
		_, week := t.ISOWeek()
		return num(week, 2, '0'), true
	case 'w':
		return num(int(t.Weekday()), 1, '0'), true
	case 'W':
		return num((t.YearDay()+6-(int(t.Weekday())+6)%7)/7, 2, '0'), true
	case 'x':
		return t.Format("01/02/06"), true
	case 'y':
		return num(t.Year()%100, 2, '0'), true
	case 'Y':
		return num(t.Year(), 1, '0'), true
	case 'z', 'Z':
		return "", true
	case '%':
		return "%", true
	}
	return "", false
}
