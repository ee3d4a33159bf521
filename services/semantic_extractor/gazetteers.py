"""Gazetteers of the heuristic extractor: small on purpose, they only help type guesses and tell
names from common words. Keys are `normalise_text_key` forms.
"""

from __future__ import annotations

import re

from services.common.domain.facts import normalise_text_key


def name_keys(*names: str) -> frozenset[str]:
    return frozenset(normalise_text_key(name) for name in names)


TECHNOLOGIES = name_keys(
    "Python", "R", "C", "C++", "C#", "Go", "Golang", "Rust", "Java", "JavaScript", "TypeScript", "Kotlin",
    "Swift", "Scala", "Haskell", "Elixir", "Erlang", "Julia", "MATLAB", "Ruby", "Rails", "PHP", "Perl", "Lua",
    "Dart", "Flutter", "SQL", "PostgreSQL", "Postgres", "MySQL", "SQLite", "Redis", "MongoDB", "Kafka", "NATS",
    "RabbitMQ", "Qdrant", "Neo4j", "FalkorDB", "Elasticsearch", "Docker", "Kubernetes", "Helm", "Terraform",
    "Ansible", "React", "Vue", "Angular", "Svelte", "Next.js", "Node.js", "Deno", "Django", "Flask", "FastAPI",
    "Spring", "PyTorch", "TensorFlow", "JAX", "Keras", "NumPy", "pandas", "Polars", "scikit-learn", "Jupyter",
    "Spark", "Hadoop", "Airflow", "dbt", "Linux", "Ubuntu", "macOS", "Windows", "Android", "iOS", "AWS", "GCP",
    "Azure", "Git", "GitHub", "GitLab", "VS Code", "VSCode", "Vim", "Neovim", "Emacs", "IntelliJ", "PyCharm",
    "Excel", "Slack", "Notion", "Figma", "Jira", "Confluence", "ChatGPT", "GPT", "GPT-4", "Claude", "Gemini",
    "LLaMA", "LangChain", "Tableau", "Power BI", "Obsidian", "Zoom", "Photoshop", "Unity", "Unreal",
    "파이썬", "자바", "자바스크립트", "타입스크립트", "러스트", "코틀린", "스위프트", "고랭", "도커", "쿠버네티스",
    "리액트", "장고", "플라스크", "파이토치", "텐서플로", "엑셀", "노션", "슬랙", "피그마", "지라", "깃허브", "깃",
    "리눅스", "우분투", "윈도우", "안드로이드", "챗GPT", "챗지피티", "엘라스틱서치", "레디스", "카프카", "스프링",
)  # fmt: skip

# Lowercase spellings that are unambiguous enough to count as technology names in running text.
TECH_LOWERCASE_OK = name_keys(
    "python", "javascript", "typescript", "kotlin", "golang", "haskell", "postgresql", "postgres", "mysql",
    "sqlite", "redis", "mongodb", "kafka", "qdrant", "neo4j", "falkordb", "docker", "kubernetes", "terraform",
    "django", "flask", "fastapi", "pytorch", "tensorflow", "numpy", "pandas", "polars", "scikit-learn",
    "jupyter", "airflow", "linux", "ubuntu", "github", "gitlab", "vscode", "vim", "neovim", "emacs", "excel",
    "notion", "figma", "jira", "chatgpt", "langchain", "tableau", "obsidian", "matlab",
)  # fmt: skip

PLACES = name_keys(
    "Seoul", "Busan", "Incheon", "Daegu", "Daejeon", "Gwangju", "Ulsan", "Sejong", "Jeju", "Suwon", "Seongnam",
    "Pangyo", "Gangnam", "Bundang", "Ilsan", "Korea", "South Korea", "Japan", "Tokyo", "Osaka", "Kyoto", "China",
    "Beijing", "Shanghai", "Hong Kong", "Taiwan", "Taipei", "Singapore", "Vietnam", "Hanoi", "Thailand",
    "Bangkok", "India", "USA", "US", "United States", "America", "Canada", "Toronto", "Vancouver", "Mexico",
    "Brazil", "New York", "San Francisco", "Los Angeles", "Seattle", "Boston", "Chicago", "Austin", "London",
    "Paris", "Berlin", "Munich", "Amsterdam", "Stockholm", "Sweden", "Germany", "France", "Spain", "Madrid",
    "Barcelona", "Italy", "Rome", "UK", "England", "Ireland", "Dublin", "Australia", "Sydney", "Melbourne",
    "서울", "부산", "인천", "대구", "대전", "광주", "울산", "세종", "제주", "제주도", "수원", "성남", "판교",
    "강남", "분당", "일산", "한국", "대한민국", "일본", "도쿄", "오사카", "중국", "베이징", "상하이", "대만",
    "싱가포르", "베트남", "미국", "뉴욕", "캐나다", "영국", "런던", "파리", "프랑스", "독일", "베를린", "호주",
)  # fmt: skip

ORGANISATIONS = name_keys(
    "Google", "Microsoft", "Apple", "Amazon", "Meta", "Facebook", "Netflix", "Samsung", "Samsung Electronics",
    "LG", "SK", "Hyundai", "Kia", "Naver", "Kakao", "Coupang", "Line", "Toss", "Baemin", "OpenAI",
    "Anthropic", "IBM", "Intel", "NVIDIA", "AMD", "Oracle", "Salesforce", "Tesla", "Uber", "Airbnb", "Spotify",
    "삼성", "삼성전자", "엘지", "현대", "현대자동차", "기아", "네이버", "카카오", "쿠팡", "라인", "토스", "배민",
    "당근", "구글", "마이크로소프트", "애플", "아마존", "메타", "오픈AI", "엔비디아",
)  # fmt: skip

ORGANISATION_SUFFIXES = re.compile(
    r"(?:\b(?:Inc|Corp|Corporation|Ltd|LLC|GmbH|Co|Company|University|College|Institute|Bank|Labs?|Group|"
    r"Foundation|Agency|Ministry|Hospital|School|Association)\.?$)|(?:주식회사|대학교|대학|은행|전자|그룹|재단|연구소|병원)$"
)
PROJECT_WORDS = re.compile(r"^(?:project|프로젝트)$", re.IGNORECASE)
PERSON_TITLES = frozenset({"mr", "mrs", "ms", "miss", "dr", "prof", "professor", "sir", "madam", "uncle", "aunt"})

# Gazetteer names that are also common words: they only count where a capital letter proves a name.
AMBIGUOUS_NAMES = name_keys("Go", "Swift", "Rust", "Spring", "Unity", "Line", "Zoom", "Meta", "Toss", "Apple", "Amazon")

# Administrative units and stations: "강남구", "수원시", "역삼동", "강남역".
KO_PLACE_NAME = re.compile(r"[\uac00-\ud7a3]{1,6}(?:특별시|광역시|시|구|군|동|읍|면|역)")

# Relatives and roles: "my friend uses R" is about the friend, never the user.
EN_RELATION_NOUNS = (
    "friend", "wife", "husband", "partner", "boyfriend", "girlfriend", "fiancé", "fiance", "fiancée", "fiancee",
    "mother", "mom", "mum", "father", "dad", "brother", "sister", "son", "daughter", "kid", "child", "children",
    "kids", "parents", "colleague", "coworker", "co-worker", "boss", "manager", "roommate", "cousin", "uncle",
    "aunt", "grandmother", "grandma", "grandfather", "grandpa", "neighbor", "neighbour", "teammate", "mentor",
)  # fmt: skip
KO_RELATION_NOUNS = frozenset(
    {
        "친구", "아내", "남편", "와이프", "부인", "여자친구", "남자친구", "애인", "엄마", "아빠", "어머니", "아버지",
        "부모님", "형", "누나", "언니", "오빠", "동생", "남동생", "여동생", "아들", "딸", "아이", "애들", "동료",
        "상사", "팀장", "팀원", "부장", "과장", "대리", "사장", "선배", "후배", "룸메이트", "사촌", "삼촌", "이모",
        "고모", "할머니", "할아버지", "이웃", "멘토", "교수", "선생님",
    }
)  # fmt: skip
