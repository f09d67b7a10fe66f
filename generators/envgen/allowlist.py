"""What generated environment code may use: modules, the attributes of each, and builtins (issue 24).

An allow-list, not a list of forbidden names: a module, an attribute of a module (``from m import a`` or
``m.a``) or a builtin that is not listed here is refused by the gate (:mod:`.gate`), whatever it is.
The lists are what the shipped catalog (``env_images/*/tools.py``, ``state.py`` ...) and the EnvGen
fixtures use, plus the pure, deterministic neighbours an environment plausibly needs.  Left out on purpose:
everything that reaches the operating system, files, processes, frames or code (``typing.sys``,
``dataclasses.inspect``, ``enum.bltns``, ``re.enum``, ``uuid.os``, ``pydantic.v1`` ...), anything that
evaluates strings (``create_model``, ``ForwardRef``, ``get_type_hints``, ``namedtuple``, ``make_dataclass``),
attribute access by string (``operator.attrgetter``/``methodcaller``, ``string.Formatter``), private
names, and modules reached as attributes unless the submodule itself is listed (``collections.abc``).
``tests/generators/envgen/test_gate_allowlist.py`` checks that no listed attribute is a module that is not
listed, and that one public step from any listed attribute reaches no module.
"""

from __future__ import annotations

__all__ = ["ALLOWED_BUILTINS", "ALLOWED_DUNDERS", "ALLOWED_MODULES", "SUPER_DUNDERS"]


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


_TYPING = _names("""
    Annotated Any Literal Optional Union ClassVar Final TypeVar Generic Protocol NewType Callable Iterable
    Iterator Sequence Mapping MutableMapping Dict List Set FrozenSet Tuple Type NamedTuple TypedDict
    NotRequired Required Self TYPE_CHECKING cast overload runtime_checkable""")

#: module -> the names that may be imported from it or read as ``module.name``.  A listed name that is
#: itself a listed module (``collections.abc``) is followed with that module's list.
ALLOWED_MODULES: dict[str, frozenset[str]] = {
    "__future__": _names("annotations"),
    "typing": _TYPING,
    "typing_extensions": _TYPING,
    "collections": _names("Counter defaultdict OrderedDict deque ChainMap abc"),
    "collections.abc": _names("""Container Iterable Iterator Mapping MutableMapping Sequence MutableSequence Set
                                 MutableSet Callable Hashable Sized Collection Generator"""),
    "datetime": _names("date datetime time timedelta timezone MINYEAR MAXYEAR"),
    "decimal": _names("""Decimal InvalidOperation ROUND_HALF_UP ROUND_HALF_EVEN ROUND_HALF_DOWN ROUND_UP
                         ROUND_DOWN ROUND_FLOOR ROUND_CEILING"""),
    "enum": _names("Enum IntEnum StrEnum Flag IntFlag auto unique"),
    "math": _names("""ceil floor trunc sqrt isclose isfinite isnan isinf inf nan pi e tau fsum prod gcd lcm log
                      log2 log10 exp pow hypot dist radians degrees sin cos tan asin acos atan atan2 copysign
                      fabs comb perm"""),
    "re": _names("""compile match fullmatch search sub subn split findall finditer escape Pattern Match error
                    IGNORECASE I MULTILINE M DOTALL S ASCII A VERBOSE X"""),
    "dataclasses": _names("dataclass field replace asdict astuple fields FrozenInstanceError"),
    "functools": _names("reduce total_ordering cached_property lru_cache cache"),
    "itertools": _names("""chain islice groupby count accumulate product permutations combinations
                           combinations_with_replacement zip_longest pairwise repeat takewhile dropwhile
                           cycle compress filterfalse tee"""),
    "random": _names("Random"),
    "json": _names("dumps loads JSONDecodeError"),
    "string": _names("ascii_letters ascii_lowercase ascii_uppercase digits hexdigits octdigits punctuation "
                     "whitespace capwords"),
    "copy": _names("copy deepcopy"),
    "operator": _names("add sub mul truediv floordiv mod neg pos abs eq ne lt le gt ge not_ and_ or_ itemgetter"),
    "statistics": _names("mean fmean median median_low median_high mode multimode pstdev stdev pvariance "
                         "variance quantiles StatisticsError"),
    "fractions": _names("Fraction"),
    "calendar": _names("monthrange isleap leapdays weekday monthcalendar MONDAY TUESDAY WEDNESDAY THURSDAY "
                       "FRIDAY SATURDAY SUNDAY"),
    "textwrap": _names("dedent indent shorten wrap fill"),
    "uuid": _names("UUID uuid3 uuid4 uuid5 NAMESPACE_DNS NAMESPACE_URL NAMESPACE_OID NAMESPACE_X500"),
    "bisect": _names("bisect bisect_left bisect_right insort insort_left insort_right"),
    "heapq": _names("heappush heappop heapify heapreplace heappushpop nlargest nsmallest merge"),
    "abc": _names("ABC abstractmethod"),
    "numbers": _names("Number Complex Real Rational Integral"),
    "unicodedata": _names("normalize category"),
    "annotated_types": _names("Gt Ge Lt Le MinLen MaxLen Len Interval MultipleOf Predicate"),
    "pydantic": _names("""BaseModel Field ConfigDict field_validator model_validator computed_field PrivateAttr
                          ValidationError ValidationInfo TypeAdapter RootModel AfterValidator BeforeValidator
                          PlainValidator WrapValidator field_serializer model_serializer PlainSerializer
                          AliasChoices StringConstraints Strict StrictStr StrictInt StrictFloat StrictBool
                          PositiveInt NegativeInt NonNegativeInt NonPositiveInt PositiveFloat NegativeFloat
                          NonNegativeFloat NonPositiveFloat FiniteFloat conint constr confloat condecimal conlist
                          conset confrozenset condate AwareDatetime NaiveDatetime PastDate FutureDate
                          PastDatetime FutureDatetime Discriminator Tag JsonValue"""),
    "gym_envfactory": _names("ToolError tool ToolAnnotations"),
    "gym_envfactory.authoring": _names("ToolError tool ToolAnnotations"),
}

#: The builtins a name may resolve to (a name the module, a function or a class binds itself is not a
#: builtin).  Not listed, so refused: ``open``, ``eval``, ``exec``, ``compile``, ``__import__``,
#: ``getattr``/``setattr``/``delattr``/``hasattr``, ``vars``, ``globals``, ``locals``, ``dir``,
#: ``breakpoint``, ``input``, ``help``, ``memoryview``, ``format``, ``id``, ``exit``/``quit`` ...
ALLOWED_BUILTINS: frozenset[str] = _names("""
    abs all any ascii bin bool bytearray bytes callable chr classmethod complex dict divmod enumerate filter
    float frozenset hash hex int isinstance issubclass iter len list map max min next object oct ord pow print
    property range repr reversed round set slice sorted staticmethod str sum super tuple type zip
    NotImplemented Ellipsis
    BaseException Exception ArithmeticError AssertionError AttributeError IndexError KeyError LookupError
    NotImplementedError OverflowError RuntimeError StopIteration TypeError ValueError ZeroDivisionError
    UnicodeError UnicodeDecodeError UnicodeEncodeError""")

#: The only dunder names and attributes generated code may use (method *definitions* such as
#: ``def __eq__`` are not names and are always fine).
ALLOWED_DUNDERS: frozenset[str] = _names("__name__ __doc__ __init__ __post_init__ __all__ __slots__")
#: Dunder methods a method may delegate to with ``super().__x__(...)``.
SUPER_DUNDERS: frozenset[str] = _names("""__init__ __post_init__ __init_subclass__ __eq__ __ne__ __lt__ __le__
                                        __gt__ __ge__ __hash__ __repr__ __str__""")
